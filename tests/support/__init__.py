"""Helpers the tests share (no fixtures live here but the fixture factory in `server`).

* `server`: a live node (`run_server`, `module_server`) and what tests read off it;
* `sse`: reading server-sent-event replies;
* `images`: test images and their wire forms;
* `actions`: OpenVLA's published action decoding and the demo VLA's action requests;
* `mm_sources`: where a node's image embeddings came from.

transformers' own models, the independent reference of the served tests, are in
`tests/support/hf_reference.py`.
"""
