"""Test-only oracle for OpenVLA (Prismatic) checkpoints.

Builds folders in OpenVLA's published Hugging Face layout and predicts actions the way
OpenVLA's ``modeling_prismatic.py`` / ``processing_prismatic.py`` do, with ``timm`` towers and
transformers' ``LlamaForCausalLM``. ``timm`` needs ``torchvision``, which does not load next to
the project's CPU torch, so everything that imports ``timm`` runs in a subprocess started by
:mod:`tests.support.prismatic_ref.oracle_env`; only that module is meant for the main
environment.
"""
