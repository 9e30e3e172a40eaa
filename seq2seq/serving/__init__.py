"""Serving: the HTTP server, its API and dynamic batching, and export to CTranslate2.

    http_api.py          limits, request bodies read and checked, the OpenAPI schema
    dynamic_batching.py  the texts of concurrent requests decoded together
    http_server.py       the starlette app, its warm-up and access log
    export.py            a run as a CTranslate2 model
"""
