"""The filters: common.py (the ones chat templates use, and the FILTERS table), rare.py
(loaded the first time one of them is used) and tojson.py.

Empty on purpose (a package ``__init__`` is on every cold start): import the modules.
"""
