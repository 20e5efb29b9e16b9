"""The node agent's report, stored: ``report.node_report_ingest``."""
