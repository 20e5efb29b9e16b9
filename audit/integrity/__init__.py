"""The tamper-evidence core of the audit log: canonical records, RFC 6962 Merkle trees, signed
checkpoints and the verifier.

Nothing in this package imports Django, so the offline verifier (``python -m audit.verify``) and
the application share exactly the same code and can never disagree on what a hash covers.
"""
