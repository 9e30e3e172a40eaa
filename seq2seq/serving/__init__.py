"""Serving: the HTTP server, its API and dynamic batching, and export to CTranslate2.

    http_api.py          limits, request bodies read and checked, the OpenAPI schema
    dynamic_batching.py  the texts of concurrent requests decoded together
    http_server.py       the starlette app, its warm-up and access log
    libretranslate.py    LibreTranslate's routes: its language codes, forms and errors
    export.py            a run as a CTranslate2 model and as an Argos Translate package
    minisbd_splitter.py  the sentence splitter an Argos package ships, in MiniSBD's format
"""
