"""A test-only policy family, to show that a family is one folder plus one registry line.

Everything the node needs to serve it lives here: `family.py` (the `PolicyFamily`, registered
when the module is imported: `vla-server serve --policy-plugin tests.toy_policy.family`),
`head.py` (its action head over the paged prefix K/V), `frontend.py` (its prompt and state
rules), `decoder.py` (its actions) and `build.py` (a tiny folder of it). Nothing outside this
folder names it.
"""
