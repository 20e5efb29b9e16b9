"""Offline verifier for audit export bundles. Imports nothing from Django.

    python -m audit.verify BUNDLE --key PUBKEY [--key OLDKEY ...] [--checkpoints DIR] [--allow-stale]

BUNDLE is a file (``-`` for standard input). A key is a file holding a PEM Ed25519 public key or a
verifier key string ``name+keyid+base64``, or that string itself. ``--checkpoints`` is a copy of the
external checkpoint folder: its chain is checked (with the proof files, each tree an extension of
the previous one) and the bundle's checkpoint must be in it and, unless ``--allow-stale``, be its
latest. When the bundle's events fork from the store's checkpoints, the first diverging sequence
number is named, or the range the store's hashes bound. Quarantines of the log are reported.

Exit status: 0 verified, 1 verification failed (the first defect is printed with its kind and
sequence number), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import VerifierKey, verifier_key_parse
from audit.integrity.report import BundleReport
from audit.integrity.store import CheckpointFolder, checkpoint_chain_verify
from audit.integrity.verifier import BundleVerifier

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def load_key(argument: str) -> VerifierKey:
    path = Path(argument)
    text = path.read_text(encoding="ascii") if path.is_file() else argument
    return verifier_key_parse(text)


def _lines(handle: BinaryIO) -> Iterator[bytes]:
    yield from handle


def verify_bundle_file(
    bundle: str, keys: Sequence[VerifierKey], *, checkpoints: Path | None = None, allow_stale: bool = False
) -> BundleReport:
    store = None
    if checkpoints is not None:
        folder = CheckpointFolder(checkpoints)
        store = checkpoint_chain_verify(folder.notes(), keys, proofs=folder.proof)
    verifier = BundleVerifier(keys, store=store, allow_stale=allow_stale)
    if bundle == "-":
        return verifier.verify(_lines(sys.stdin.buffer))
    with open(bundle, "rb", buffering=1 << 20) as handle:
        return verifier.verify(_lines(handle))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m audit.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", help="the export bundle (JSON Lines), or - for standard input")
    parser.add_argument("--key", action="append", required=True, help="a trusted verifier key (file or string)")
    parser.add_argument("--checkpoints", type=Path, help="a copy of the external checkpoint folder")
    parser.add_argument("--allow-stale", action="store_true", help="accept a bundle older than the latest checkpoint")
    arguments = parser.parse_args(argv)
    try:
        keys = [load_key(argument) for argument in arguments.key]
    except (OSError, ValueError) as error:
        sys.stderr.write(f"error: cannot read key: {error}\n")
        return EXIT_USAGE
    if arguments.checkpoints is not None and not arguments.checkpoints.is_dir():
        sys.stderr.write(f"error: {arguments.checkpoints} is not a folder\n")
        return EXIT_USAGE
    try:
        report = verify_bundle_file(
            arguments.bundle, keys, checkpoints=arguments.checkpoints, allow_stale=arguments.allow_stale
        )
    except OSError as error:
        sys.stderr.write(f"error: cannot read bundle: {error}\n")
        return EXIT_USAGE
    except VerificationFailure as failure:
        where = f"seq {failure.seq}" if failure.seq is not None else "bundle"
        sys.stdout.write(f"FAILED {where} [{failure.kind}]: {failure.message}\n")
        return EXIT_FAILED
    sys.stdout.write(report.summary() + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
