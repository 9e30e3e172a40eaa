"""The OpenAPI 3.1 document of seq2seq-serve (GET /openapi.json): both dialects' routes,
made from their own tables (the native `FIELDS`, LibreTranslate's fields, the document
formats of `documents.formats`)."""

from __future__ import annotations

from seq2seq.documents.formats import EXTENSIONS
from seq2seq.serving.http_api import GLOSSARY_HELP, GLOSSARY_SCHEMA, Limits
from seq2seq.serving.libretranslate import TEXT_FORMATS
from seq2seq.serving.native_api import FIELDS


def openapi(limits: Limits, engine: str, version: str, languages: dict | None = None
            ) -> dict:
  """The OpenAPI 3.1 description of the server's API; `languages`: the model's
  {"source": CODE, "target": CODE} once it has loaded."""
  pair = f"from {languages['source']} to {languages['target']} " if languages else ""
  fields = {name: dict(schema, description=text) for name, (schema, text) in FIELDS.items()}
  fields["texts"]["maxItems"] = limits.max_texts
  fields["beam_size"]["maximum"] = limits.max_beam
  alternative = {"type": "object", "properties": {"text": {"type": "string"},
                                                   "score": {"type": "number"}}}
  error = {"description": "the problem, named", "content": {"application/json": {
      "schema": {"type": "object", "properties": {"error": {"type": "string"}}}}}}
  answer = {"type": "object", "properties": {
      "translation": {"type": "string"},
      "translations": {"type": "array", "items": {"type": "string"}},
      "alternatives": {"description": "with nbest: for text, a list; for texts, a list of "
                                      "lists", "type": "array",
                       "items": {"anyOf": [alternative, {"type": "array",
                                                         "items": alternative}]}},
      "attention": {"type": "object", "properties": {
          "source": {"type": "array", "items": {"type": "string"}},
          "target": {"type": "array", "items": {"type": "string"}},
          "weights": {"type": "array", "items": {"type": "array",
                                                 "items": {"type": "number"}}}}}}}
  json_answer = lambda schema, text: {"description": text, "content": {
      "application/json": {"schema": schema}}}
  lt_key = {"type": "object", "properties": {"api_key": {"type": "string"}}}
  lt_request = {"type": "object", "required": ["q", "source", "target"], "properties": {
      "q": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                           "maxItems": limits.max_texts}]},
      "source": {"type": "string"}, "target": {"type": "string"},
      "format": {"enum": list(TEXT_FORMATS)}, "alternatives": {"type": "integer"},
      "api_key": {"type": "string"},
      "glossary": {**GLOSSARY_SCHEMA, "description": "this server's extension, not "
                   "LibreTranslate's: " + GLOSSARY_HELP + " (in a form, the object as JSON)"}}}
  lt_answer = {"type": "object", "required": ["translatedText"], "properties": {
      "translatedText": {"anyOf": [{"type": "string"},
                                   {"type": "array", "items": {"type": "string"}}]},
      "alternatives": {"type": "array"}, "detectedLanguage": {}}}
  lt_detect = {"type": "object", "required": ["q"], "properties": {
      "q": {"type": "string"}, "api_key": {"type": "string"}}}
  return {
      "openapi": "3.1.0",
      "info": {"title": "seq2seq-serve", "version": version,
               "description": f"Translation {pair}with a seq2seq model ({engine} engine)."},
      "paths": {
          "/translate": {"post": {
              "summary": "Translate one text or several (the native API); a body with `q` "
                         "is LibreTranslate's, as JSON or a form",
              "requestBody": {"required": True, "content": {
                  "application/json": {"schema": {
                      "type": "object", "properties": fields, "additionalProperties": False,
                      "oneOf": [{"required": ["text"]}, {"required": ["texts"]}]}},
                  "application/x-www-form-urlencoded": {"schema": lt_request}}},
              "responses": {
                  "200": json_answer({"anyOf": [answer, lt_answer]}, "the translations"),
                  **{str(code): error for code in (400, 403, 408, 413, 415, 422, 429, 503)}}}},
          "/languages": {method: {
              "summary": "LibreTranslate's: the languages the model translates between",
              **({"requestBody": {"content": {"application/json": {"schema": lt_key}}}}
                 if method == "post" else {}),
              "responses": {"200": json_answer({"type": "array", "items": {
                  "type": "object", "properties": {
                      "code": {"type": "string"}, "name": {"type": "string"},
                      "targets": {"type": "array", "items": {"type": "string"}}}}},
                  "the languages"), **{str(code): error for code in (400, 403, 408, 413, 503)}}}
              for method in ("get", "post")},
          "/detect": {"post": {
              "summary": "LibreTranslate's: the language of q (the model's source language)",
              "requestBody": {"required": True, "content": {
                  "application/json": {"schema": lt_detect},
                  "application/x-www-form-urlencoded": {"schema": lt_detect}}},
              "responses": {"200": json_answer({"type": "array", "items": {
                  "type": "object", "properties": {"language": {"type": "string"},
                                                   "confidence": {"type": "number"}}}},
                  "the language"), **{str(code): error for code in (400, 403, 408, 413, 503)}}}},
          "/frontend/settings": {"get": {
              "summary": "LibreTranslate's: what its web page needs to know",
              "responses": {"200": json_answer({"type": "object"}, "the settings"),
                            "503": error}}},
          "/health": {"get": {"summary": "Ready (200) once the model is loaded and compiled; "
                              "503 before", "responses": {
                                  "200": json_answer({"type": "object"}, "ready"),
                                  "503": json_answer({"type": "object"}, "starting")}}},
          "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
              "200": {"description": "text exposition format",
                      "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
          "/openapi.json": {"get": {"summary": "this document", "responses": {
              "200": json_answer({"type": "object"}, "OpenAPI 3.1")}}},
          "/": {"get": {"summary": "a page to try the model", "responses": {
              "200": {"description": "HTML", "content": {"text/html": {}}}}}},
          "/translate_file": {"post": {
              "summary": "Translate a document (LibreTranslate's API): "
                         + ", ".join(EXTENSIONS),
              "requestBody": {"required": True, "content": {"multipart/form-data": {
                  "schema": {"type": "object", "required": ["file", "source", "target"],
                             "properties": {"file": {"type": "string", "format": "binary"},
                                            "source": {"type": "string"},
                                            "target": {"type": "string"},
                                            "api_key": {"type": "string"}}}}}},
              "responses": {
                  "200": json_answer({"type": "object", "properties": {
                      "translatedFileUrl": {"type": "string"}}}, "where to download it"),
                  **{str(code): error for code in (400, 403, 408, 413, 429, 503)}}}},
          "/download_file/{filename}": {"get": {
              "summary": f"A translated document, for {limits.file_ttl_s:g} seconds",
              "parameters": [{"name": "filename", "in": "path", "required": True,
                              "schema": {"type": "string"}}],
              "responses": {"200": {"description": "the file",
                                    "content": {"application/octet-stream": {}}},
                            "404": error}}},
      },
  }
