# GPU Portal: two commands do all set-up on a fresh machine.
#   make run    the portal on the embedded default (SQLite, in-process tasks, manifests folder, demo data)
#   make test   the whole suite against PostgreSQL, Redis and a real kube-apiserver (installed as needed)

# PYTHON: the interpreter for a new venv; empty: scripts/find-python.sh picks 3.11, 3.12 or 3.13.
PYTHON ?=
VENV   ?= .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
UV_VERSION := 0.13.8

include tools/kube-testenv.mk
include tools/nvcheck.mk
include tools/helm.mk

.PHONY: help venv venv-run lock podresources-stubs run test test-fast lint browser prometheus ldap clean screenshots

help:
	@echo "make run        serve the portal on http://127.0.0.1:$(PORT) with demo data"
	@echo "make test       the whole suite (PostgreSQL, Redis, kube-apiserver, Chromium)"
	@echo "make test-fast  the suite on SQLite, skipping what needs the services"
	@echo "make lint       ruff, mypy --strict and the migrations check"
	@echo "make screenshots  the README's screenshots (docs/screenshots/), desktop and phone, from the browser tests"
	@echo "make simulate   the simulator: SEEDS=1-200 STEPS=1000 [JOBS=2 MINUTES=120 MUTATION=name|all] (docs/simulation.md)"
	@echo "make deploy-check  the Helm charts: lint, render, schema, server dry run, push as the target ServiceAccount"
	@echo "make lock       recompile requirements.lock and requirements-dev.lock after a pyproject.toml change"

## venv: the development lock (runtime + test and lint tools; python-ldap in it builds against the
## headers `make ldap` installs); venv-run: the runtime lock only.
## One venv serves both: scripts/venv.sh stamps it with the lock installed (docs/install.md).
VENV_ENV := VENV=$(VENV) PYTHON=$(PYTHON) UV_VERSION=$(UV_VERSION)

venv: ldap
	@$(VENV_ENV) scripts/venv.sh dev

venv-run:
	@$(VENV_ENV) scripts/venv.sh runtime

## podresources-stubs: regenerate agent/podresources/ (the kubelet's PodResources v1 gRPC stubs) from
## upstream's api.proto at the pinned Kubernetes version (scripts/podresources_stubs.py; Go fetches it).
podresources-stubs: venv
	$(BIN)/python scripts/podresources_stubs.py

## lock: recompile both locks after a change to pyproject.toml (the dev lock first; the runtime
## lock takes its pins from it, so both hold the same versions) for every supported Python.
lock:
	@test -x $(BIN)/uv || $(VENV_ENV) scripts/venv.sh runtime
	$(BIN)/uv pip compile -q pyproject.toml --extra dev --universal --python-version 3.11 -o requirements-dev.lock
	$(BIN)/uv pip compile -q pyproject.toml --universal --python-version 3.11 -c requirements-dev.lock -o requirements.lock

## RUN_STARTED: when make began (read as the Makefile is), so that make run's banner counts the
## installing of venv-run too, not only what scripts/run.sh does after it.
RUN_STARTED := $(shell date +%s)
run: venv-run
	@VENV=$(VENV) PORT=$(PORT) GPUPORTAL_RUN_STARTED=$(RUN_STARTED) scripts/run.sh

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

## screenshots: the README's images, taken by tests/browser/test_screenshots.py (skipped unless
## GPUPORTAL_SCREENSHOTS names a folder), on SQLite like make test-fast.
screenshots: venv browser
	GPUPORTAL_DEBUG=true GPUPORTAL_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest tests/browser/test_screenshots.py -q -p no:cacheprovider

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

## simulate: the simulator beyond the suite's budget (docs/simulation.md): SEEDS seeds of STEPS steps,
## every invariant after every step, in JOBS processes, starting no seed after MINUTES (0: no limit);
## MUTATION=<name>|all checks that broken code is caught instead.
## With DATABASE_URL set it uses that PostgreSQL, else it starts the suite's services (as make test).
SEEDS ?= 1-200
STEPS ?= 1000
MUTATION ?=
JOBS ?= 1
MINUTES ?= 0
SIMULATE := $(BIN)/python -m tests.simulation --seeds $(SEEDS) --steps $(STEPS) --jobs $(JOBS) --minutes $(MINUTES) \
	$(if $(MUTATION),--mutation $(MUTATION))
.PHONY: simulate
simulate: venv
	@if [ -n "$$DATABASE_URL" ]; then \
		GPUPORTAL_REQUIRE_POSTGRES=1 GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE=1 $(SIMULATE); \
	else \
		env_file=$$(mktemp); trap 'scripts/services.sh down; rm -f "$$env_file"' EXIT; \
		scripts/services.sh up >"$$env_file" && . "$$env_file" && unset CELERY_BROKER_URL && \
		GPUPORTAL_REQUIRE_POSTGRES=1 GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE=1 $(SIMULATE); \
	fi

## compose-secrets: the two secret files and the .env (database passwords) docker-compose.yml
## needs, made once with safe permissions; an existing one is never overwritten.
.PHONY: compose-secrets
compose-secrets:
	scripts/compose-secrets.sh

## cli-docs: regenerate docs/cli.md from the command tree of the gpuportal client (tests/cli checks it).
.PHONY: cli-docs
cli-docs: venv
	$(BIN)/python -m cli docs > docs/cli.md
