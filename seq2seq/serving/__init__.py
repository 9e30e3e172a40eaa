"""Serving: the HTTP server, its API and dynamic batching, and Argos Translate packages.

    http_api.py          limits, request bodies read and checked, the OpenAPI schema
    dynamic_batching.py  the texts of concurrent requests decoded together
    http_server.py       the starlette app, its warm-up and access log
    models.py            the models served, and the route (direct or a pivot) of each pair
    detection.py         the language of a text, among the languages served
    libretranslate.py    LibreTranslate's routes: its language codes, forms and errors
    argos_package.py     a run as an Argos Translate package (LibreTranslate installs it)
    minisbd_splitter.py  the sentence splitter an Argos package ships, in MiniSBD's format
"""
