# GPU Portal: two commands do all set-up on a fresh machine.
#   make run    the portal on the embedded default (SQLite, in-process tasks, manifests folder, demo data)
#   make test   the whole suite against PostgreSQL, Redis and a real kube-apiserver (installed as needed)

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
UV_VERSION := 0.13.8

include tools/kube-testenv.mk
include tools/nvcheck.mk
include tools/helm.mk

.PHONY: help venv run test test-fast lint browser prometheus ldap clean

help:
	@echo "make run        serve the portal on http://127.0.0.1:$(PORT) with demo data"
	@echo "make test       the whole suite (PostgreSQL, Redis, kube-apiserver, Chromium)"
	@echo "make test-fast  the suite on SQLite, skipping what needs the services"
	@echo "make lint       ruff, mypy --strict and the migrations check"
	@echo "make deploy-check  the Helm charts: lint, render, schema, server dry run, push as the target ServiceAccount"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml requirements.lock
	$(BIN)/python -m pip install -q "uv==$(UV_VERSION)"
	$(BIN)/uv pip sync -q --python $(BIN)/python requirements.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	@touch $@

venv: $(VENV)/.installed

run: venv
	GPUPORTAL_DEBUG=true $(BIN)/python manage.py migrate --noinput
	GPUPORTAL_DEBUG=true $(BIN)/python manage.py seed_demo
	GPUPORTAL_DEBUG=true $(BIN)/python manage.py collectstatic --noinput -v0
	@echo "GPU Portal on http://127.0.0.1:$(PORT)/ (users alice, bob, carol, dave, erin, admin; password: demo)"
	GPUPORTAL_DEBUG=true $(BIN)/python manage.py runserver 127.0.0.1:$(PORT)

## browser: Debian's Chromium for the browser tests (never a downloaded browser build).
browser:
	@command -v chromium >/dev/null || { \
		if [ "$$(id -u)" -ne 0 ]; then echo "chromium is missing: apt-get install chromium (as root)"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }

## ldap: Debian's OpenLDAP for the LDAP tests (slapd, run by python-ldap's slapdtest) and the headers
## python-ldap (the `ldap` extra, part of the dev extra) builds against; before venv, which builds it.
## `make run` needs none of it: LDAP sign-in is optional (docs/identity.md, "LDAP").
ldap:
	@{ command -v slapd >/dev/null || [ -x /usr/sbin/slapd ]; } && command -v ldapadd >/dev/null \
		&& [ -f /usr/include/ldap.h ] && [ -f /usr/include/sasl/sasl.h ] || { \
		if [ "$$(id -u)" -ne 0 ]; then echo "OpenLDAP is missing: apt-get install slapd ldap-utils libldap2-dev libsasl2-dev (as root)"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			slapd ldap-utils libldap2-dev libsasl2-dev; }

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	GPUPORTAL_DEBUG=true $(BIN)/python manage.py makemigrations --check --dry-run

## prometheus: Debian's Prometheus and promtool, for the alert-rule tests and the utilisation tests
## (a real Prometheus on loopback loaded with recorded dcgm-exporter series).
prometheus:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
		if [ "$$(id -u)" -ne 0 ]; then echo "prometheus is missing: apt-get install prometheus (as root)"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }

test: ldap venv kube-testenv nvcheck browser prometheus helm
	scripts/test.sh

test-fast: venv
	GPUPORTAL_DEBUG=true $(BIN)/python -m pytest -q -x

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache

## compose-secrets: the two secret files and the .env (database passwords) docker-compose.yml
## needs, made once with safe permissions; an existing one is never overwritten.
.PHONY: compose-secrets
compose-secrets:
	scripts/compose-secrets.sh

## cli-docs: regenerate docs/cli.md from the command tree of the gpuportal client (tests/cli checks it).
.PHONY: cli-docs
cli-docs: venv
	$(BIN)/python -m cli docs > docs/cli.md
