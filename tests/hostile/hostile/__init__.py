"""A hostile-input suite for MQTT brokers (and mesgd's relay and content front ends)."""
