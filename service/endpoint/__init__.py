"""The recommend endpoint (issue 29): `POST /v1/recommend`, an async HTTP service in front of
TF Serving's `retrieve` signature (TF-free).

    python -m service.endpoint --config configs/recommender_service.yaml

One request: the body read within endpoint.max_body_bytes and validated (request.py), the
user's click history read from Redis (history.py) and merged with the session's recent clicks by
core/click_history.py's rule, the k items `retrieve` scores highest (tf_serving.py), joined with
the item catalog's public columns (catalog.py). No history (or Redis down): the serving
version's most frequent items (model_items.py). Routes and wiring: app.py; metrics: metrics.py.
"""
