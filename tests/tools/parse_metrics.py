"""Parses a Prometheus text exposition from standard input with the reference Python parser
(prometheus_client) and prints every sample as JSON lines: {"name", "labels", "value"}.
Exits non-zero if the text does not parse."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        print(json.dumps({"name": sample.name, "labels": sample.labels, "value": sample.value, "type": family.type}))
