"""Offline verifier for audit export bundles. Imports nothing from Django.

    python -m audit.verify BUNDLE --key PUBKEY [--key OLDKEY ...] [--checkpoints DIR] [--allow-stale]

BUNDLE is a file (``-`` for standard input). A key is a file holding a PEM Ed25519 public key or a
verifier key string ``name+keyid+base64``, or that string itself. ``--checkpoints`` is a copy of the
external checkpoint folder: its chain is checked (with the proof files, each tree an extension of
the previous one) and the bundle's checkpoint must agree with it. When the bundle's events fork
from the store's checkpoints, the first diverging sequence number is named, or the range the
store's hashes bound. Quarantines of the log are reported.

Two answers. Genuine: the ``OK`` line and what the bundle proves as of its own checkpoint. Complete
as of now: the ``AS OF NOW`` line, against the folder's latest checkpoint; when that one covers
more events, the bundle is genuine but not complete as of now, with the consistency proof from the
bundle's tree to the newer one, and the exit status says so.

Exit status: 0 genuine and complete as of the folder's latest checkpoint (without ``--checkpoints``:
genuine, and nothing newer could be known; the AS OF NOW line says so), 1 not genuine (the first
defect is printed with its kind and sequence number), 2 bad usage, 3 genuine but not complete as of
now (``--allow-stale`` makes that 0 for scripts that only ask whether a bundle is genuine).
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

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_CURRENT = 0, 1, 2, 3


def load_key(argument: str) -> VerifierKey:
    path = Path(argument)
    text = path.read_text(encoding="ascii") if path.is_file() else argument
    return verifier_key_parse(text)


def _lines(handle: BinaryIO) -> Iterator[bytes]:
    yield from handle


def verify_bundle_file(bundle: str, keys: Sequence[VerifierKey], *, checkpoints: Path | None = None) -> BundleReport:
    store = None
    if checkpoints is not None:
        folder = CheckpointFolder(checkpoints)
        store = checkpoint_chain_verify(folder.notes(), keys, proofs=folder.proof)
    verifier = BundleVerifier(keys, store=store)
    if bundle == "-":
        return verifier.verify(_lines(sys.stdin.buffer))
    with open(bundle, "rb", buffering=1 << 20) as handle:
        return verifier.verify(_lines(handle))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m audit.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", help="the export bundle (JSON Lines), or - for standard input")
    parser.add_argument("--key", action="append", required=True, help="a trusted verifier key (file or string)")
    parser.add_argument("--checkpoints", type=Path, help="a copy of the external checkpoint folder")
    parser.add_argument(
        "--allow-stale", action="store_true",
        help=f"exit {EXIT_OK}, not {EXIT_NOT_CURRENT}, for a genuine bundle older than the folder's latest checkpoint",
    )
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
        report = verify_bundle_file(arguments.bundle, keys, checkpoints=arguments.checkpoints)
    except OSError as error:
        sys.stderr.write(f"error: cannot read bundle: {error}\n")
        return EXIT_USAGE
    except VerificationFailure as failure:
        where = f"seq {failure.seq}" if failure.seq is not None else "bundle"
        sys.stdout.write(f"FAILED {where} [{failure.kind}]: {failure.message}\n")
        return EXIT_FAILED
    sys.stdout.write(report.summary() + "\n")
    if report.current is False and not arguments.allow_stale:
        return EXIT_NOT_CURRENT
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
