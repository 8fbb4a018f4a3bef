"""Runs other tools can read: OpenTelemetry spans of runs and batches (GenAI semantic conventions),
exported over OTLP/HTTP or to an OTLP JSON file, off unless asked for."""
