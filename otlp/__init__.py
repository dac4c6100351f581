"""Ingestion adapters: OpenTelemetry traces (OTLP/HTTP) turned into feedback sessions."""
