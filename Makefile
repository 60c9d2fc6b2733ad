# Mooncake-C top-level Makefile: everything real happens in src/.
#
#   make                 build src/mooncake-server (installs missing Debian packages first)
#   make test            build, then run every test; ends with "N passed, N failed"
#   make run             build and start the server with ./mooncake.conf
#   make SANITIZER=address test   the same suite against an ASan+UBSan build
#   make fuzz            a short libFuzzer run of the RESP parser
#   make deps            install the Debian packages (idempotent)
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

run: all
	./src/mooncake-server mooncake.conf

fuzz: deps-test
	$(MAKE) -C src fuzz
	./build/fuzz/fuzz_resp -max_total_time=$${FUZZ_SECONDS:-30} -max_len=4096 build/fuzz/corpus tests/fuzz/seeds

bench: all
	./utils/bench-vs-redis.sh

install: all
	$(MAKE) -C src install PREFIX=$(PREFIX)

clean:
	$(MAKE) -C src clean
	rm -rf build tests/tmp

distclean: clean
