"""Serving: the HTTP server, the translation service under its two APIs, and dynamic
batching.

    http_server.py       the starlette app: its route table, lifespan and access log
    service.py           the translation service: routes, detects, checks, batches, answers
    native_api.py        the native API: its JSON fields read, its answers written
    libretranslate.py    LibreTranslate's API: its language codes, forms, files and errors
    http_api.py          what both APIs share: limits, API keys, JSON bodies, texts, glossaries
    openapi.py           both APIs' OpenAPI 3.1 document
    dynamic_batching.py  the texts of concurrent requests decoded together
    models.py            the models served, and the route (direct or a pivot) of each pair
    detection.py         the language of a text, among the languages served
"""
