"""GPU node agent: reads the GPUs of one node through NVML and reports them to the portal.

This package runs on GPU nodes (a DaemonSet), not in the portal, so it must not import Django
or anything from the rest of the project. The report it sends is defined by
``report_schema.json`` (JSON Schema) and mirrored by the typed model in ``report.py``.
"""

AGENT_NAME = "gpuportal-agent"
AGENT_VERSION = "0.1.0"
