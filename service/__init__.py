"""The recommender as a service (TF-free: imports core only): the history updater, a Kafka
consumer keeping users' click histories in Redis (updater.py), and the recommend endpoint in
front of TF Serving's `retrieve` (endpoint/). Settings: configs/recommender_service.yaml."""
