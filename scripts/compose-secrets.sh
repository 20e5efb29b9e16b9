#!/bin/sh
# The secrets docker-compose.yml needs, made once: `make compose-secrets` (or scripts/compose-secrets.sh [DIR]).
#
#   secrets/gpuportal_secret_key          Django's secret key (64 random hex characters)
#   secrets/gpuportal_audit_signing_key   the Ed25519 key that signs audit checkpoints (PKCS#8 PEM)
#   .env                                  POSTGRES_PASSWORD and GPUPORTAL_APP_DB_PASSWORD, read by compose
#
# in DIR (default: the repository root, beside docker-compose.yml). A file that exists is never
# overwritten (a new audit key would not verify the old checkpoints; a new database password would
# not match the one the database volume was created with), so the script is safe to run again.
# The folder secrets/ is private to its owner (700): nobody else on the host can reach the files.
# The secret files themselves are 644, because Compose (without Swarm) bind-mounts a secret file
# with its host owner and mode, and the image's user (uid 10001) must read it as /run/secrets/…;
# .env stays 600 (only the compose command reads it).
# Needs openssl (or python3 with the cryptography package) for the Ed25519 key.
set -eu

dir=${1:-$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)}
secrets="$dir/secrets"
umask 077
mkdir -p "$secrets"
chmod 700 "$secrets"

random_hex() {  # $1 random bytes as hex
    od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'
}

place() {  # move $1 to $2 with mode $3 unless $2 exists (then $1 is dropped); says which
    if ln "$1" "$2" 2>/dev/null; then
        rm -f "$1"
        chmod "$3" "$2"
        echo "created $2"
    else
        rm -f "$1"
        echo "kept    $2 (exists)"
    fi
}

ed25519_key() {  # a new Ed25519 private key, PKCS#8 PEM, into $1
    if command -v openssl >/dev/null 2>&1 && openssl genpkey -algorithm ed25519 -out "$1" 2>/dev/null; then
        return 0
    fi
    if command -v python3 >/dev/null 2>&1 && python3 - "$1" <<'PY' 2>/dev/null
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

pem = Ed25519PrivateKey.generate().private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
)
with open(sys.argv[1], "wb") as handle:
    handle.write(pem)
PY
    then
        return 0
    fi
    echo "compose-secrets: neither openssl nor python3 with cryptography can make an Ed25519 key;" >&2
    echo "  make one with: .venv/bin/python manage.py audit_keys --generate $secrets/gpuportal_audit_signing_key" >&2
    return 1
}

target="$secrets/gpuportal_secret_key"
if [ -e "$target" ]; then
    echo "kept    $target (exists)"
else
    tmp=$(mktemp "$secrets/.new.XXXXXX")
    random_hex 32 >"$tmp"
    place "$tmp" "$target" 644
fi

target="$secrets/gpuportal_audit_signing_key"
if [ -e "$target" ]; then
    echo "kept    $target (exists)"
else
    tmp=$(mktemp "$secrets/.new.XXXXXX")
    rm -f "$tmp"
    ed25519_key "$tmp"
    place "$tmp" "$target" 644
fi

target="$dir/.env"
if [ -e "$target" ]; then
    echo "kept    $target (exists; add POSTGRES_PASSWORD and GPUPORTAL_APP_DB_PASSWORD yourself if it lacks them)"
else
    tmp=$(mktemp "$dir/.env.new.XXXXXX")
    {
        echo "# Made by scripts/compose-secrets.sh; read by docker compose. The database volume keeps the"
        echo "# passwords it was first created with: change them there before changing them here."
        echo "POSTGRES_PASSWORD=$(random_hex 24)"
        echo "GPUPORTAL_APP_DB_PASSWORD=$(random_hex 24)"
    } >"$tmp"
    place "$tmp" "$target" 600
fi
