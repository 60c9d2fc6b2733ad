# Mooncake-C top-level Makefile: everything real happens in src/.
#
#   make                 build src/mooncake-server (installs missing Debian packages first)
#   make test            build, then run every test; ends with "N passed, N failed"
#   make run [ARGS="--port 7000 ..."]
#                        build and start the server with a copy of ./mooncake.conf
#                        (build/mooncake.conf, which CONFIG REWRITE writes), plus ARGS
#   make SANITIZER=address test   the same suite against an ASan+UBSan build
#   make fuzz            libFuzzer on every parser that reads the wire (tests/fuzz, 120 s;
#                        FUZZ_SECONDS=N for another length)
#   make deps            install the Debian packages `make` needs (idempotent; `make test`
#                        installs the test packages too: deps/install.sh)
#   make bench           utils/bench/bench-vs-redis.sh: this server beside redis-server
#   make install [PREFIX=/usr/local]
#   make clean

PREFIX ?= /usr/local
export SANITIZER

.PHONY: all test run deps deps-test fuzz bench install clean distclean

all: deps
	$(MAKE) -C src

deps:
	@sh deps/install.sh build

deps-test:
	@sh deps/install.sh test

test: deps-test
	$(MAKE) -C src all unit-tests
	./tests/runtest $(TEST_ARGS)

# The server runs from a copy so that CONFIG REWRITE never edits the tracked
# file; the copy is refreshed (dropping earlier rewrites) when mooncake.conf changes.
# RUN_CONF=path runs from another copy (the docs test uses a fresh one of its
# own, so nothing a user's CONFIG REWRITE left in build/ reaches the suite).
RUN_CONF ?= build/mooncake.conf

$(RUN_CONF): mooncake.conf
	@mkdir -p $(dir $@)
	@if [ -f $@ ]; then echo "mooncake.conf changed: refreshing $@ from it (earlier CONFIG REWRITEs there are replaced)"; fi
	@cp mooncake.conf $@

run: all $(RUN_CONF)
	./src/mooncake-server $(RUN_CONF) $(ARGS)

fuzz: deps-test
	FUZZ_SECONDS=$${FUZZ_SECONDS:-120} sh tests/fuzz/run.sh

bench: all
	./utils/bench/bench-vs-redis.sh

install: all
	$(MAKE) -C src install PREFIX=$(PREFIX)

clean:
	$(MAKE) -C src clean
	rm -rf build tests/tmp

distclean: clean
