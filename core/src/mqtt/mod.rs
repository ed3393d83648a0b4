//! The sans-I/O MQTT 3.1 / 3.1.1 / 5.0 codec.
