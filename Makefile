# gpuhost: the whole set-up on a fresh Debian 12 machine is one of these two targets.
#   make audit   install into .venv and audit this machine (read-only)
#   make test    install everything (system packages too) and run the whole suite
SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= /usr/bin/python3
BIN := $(VENV)/bin
SYSTEM_PACKAGES := openssh-server pciutils fuse3 python3-venv sudo chromium-headless-shell gcc libc6-dev
# without their recommends: grub-common's os-prober would probe this machine's disks
BARE_PACKAGES := grub-common grub2-common
LAB_DEBS := /var/cache/gpuhost-lab
PYTEST_ARGS ?=

.PHONY: audit test install install-test system-deps lab-demo molecule changelog man bench clean generate scenario-coverage sanity

# what `make audit` needs (gpuhost and its runtime dependencies) ...
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/pip install -q --disable-pip-version-check -e .
	touch $@

# ... and what `make test` needs besides (the test tools, and every wheel kept offline)
$(BIN)/.installed-test: $(BIN)/.installed pyproject.toml
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	@# everything it installed, as wheels: the pipx and README tests install from them offline
	$(BIN)/python -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb'))['project']; print(*d['dependencies'], *d['optional-dependencies']['test'], sep='\n')" > $(VENV)/deps.txt
	$(BIN)/pip wheel -q --disable-pip-version-check -w $(VENV)/wheelhouse -r $(VENV)/deps.txt
	@# ansible-test's own virtual environments for the sanity tests, made now (the tests run offline)
	$(BIN)/python tools/ansible_test_sanity.py --prime >/dev/null
	touch $@

install: $(BIN)/.installed
	@# byte-compile the project's own modules, as pip does a wheel's (an editable install's are
	@# not): where PYTHONDONTWRITEBYTECODE is set, every CLI run and lab supervisor would compile
	@# them again (0.15 s of CPU a process). Quick when nothing changed.
	$(BIN)/python -m compileall -q src ansible_collections

install-test: $(BIN)/.installed-test install

# the role glue, argument specs, watch lists and docs, made from the controls' declarations
# (plugins/module_utils/controls/<id>.py); tests/unit/test_generated.py fails while they are stale
generate: $(BIN)/.installed
	$(BIN)/python -m gpuhost.generate

# The lab needs sshd, the real lspci/setpci, FUSE and the real grub-mkconfig (grub-common; grub2-common's update-grub;
# no recommends: os-prober would probe this machine's disks); the HTML report's test a real browser. Installing openssh-server must not
# start the machine's own sshd on 0.0.0.0:22, so service starts are refused meanwhile.
system-deps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  policy=/usr/sbin/policy-rc.d; ours=; \
	  if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' > $$policy; chmod +x $$policy; ours=1; fi; \
	  (apt-get install -y -qq $$missing || (apt-get update -qq && apt-get install -y -qq $$missing)) >/dev/null; rc=$$?; \
	  [ -n "$$ours" ] && rm -f $$policy; [ $$rc -eq 0 ] || exit $$rc; \
	fi
	@# the lab's hosts get the real unattended-upgrades package's files, from its .deb (nothing installed here)
	@ls $(LAB_DEBS)/unattended-upgrades_*.deb >/dev/null 2>&1 || { mkdir -p $(LAB_DEBS) && cd $(LAB_DEBS) && \
	  { apt-get download -qq unattended-upgrades 2>/dev/null || { apt-get update -qq && apt-get download -qq unattended-upgrades 2>/dev/null; }; }; }
	@missing=$$(for p in $(BARE_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  (apt-get install -y -qq --no-install-recommends $$missing || (apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing)) >/dev/null; \
	fi

# exit 2 means "findings": the audit worked; make fails only on bad input (1) or errors (3)
audit: install
	$(BIN)/gpuhost audit || [ $$? -eq 2 ]

test: system-deps install-test
	@# worksteal: a worker that runs out takes the other's queued tests, so the long lab cycles never end on one
	$(BIN)/python -m pytest -n 2 --dist worksteal $(PYTEST_ARGS)

# ansible-test sanity on the collection, every test (pylint too), offline in the environments install-test made
sanity: install-test
	$(BIN)/python tools/ansible_test_sanity.py

lab-demo: install
	$(BIN)/gpuhost lab up tests/specs/seed/pve-gpu1.yml tests/specs/seed/llm-two.yml --dir .lab

# a release of the collection: antsibull-changelog turns the fragments into the release (VERSION=x.y.z),
# then the changelog's lists are indented as the collection's own lint wants them
changelog: install-test
	cd ansible_collections/gpuhost/stack && PATH="$(abspath $(BIN)):$$PATH" antsibull-changelog release $(if $(VERSION),--version $(VERSION))
	$(BIN)/python tools/changelog_reindent.py ansible_collections/gpuhost/stack/changelogs/changelog.yaml

# docs/gpuhost.1 from the CLI's parser (tools/make_manpage.py); a test fails while it is stale
man: install-test
	$(BIN)/python tools/make_manpage.py

# molecule's default scenario on the seed lab (create, check, converge, idempotence, verify,
# destroy); its Ansible and gpuhost are the venv's, so the venv goes first on PATH
molecule: system-deps install-test
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/molecule test

# the branches of every control's judgement (plugins/module_utils/controls/<id>.py) that the
# scenarios of tests/controls/ reach, as a figure
scenario-coverage: install-test
	$(BIN)/python -m coverage run --data-file=.coverage.scenarios --branch --include='*/module_utils/controls/[a-z]*_*.py' \
	  -m pytest -q -p no:cacheprovider tests/unit/test_controls.py -k test_scenario
	$(BIN)/python -m coverage report --data-file=.coverage.scenarios

bench: system-deps install-test
	$(BIN)/python benchmarks/lab_bringup.py
	$(BIN)/python benchmarks/audit_vs_setup.py
	$(BIN)/python benchmarks/fleet_audit.py
	$(BIN)/python benchmarks/guest_cuda.py

clean:
	rm -rf $(VENV) build *.egg-info
