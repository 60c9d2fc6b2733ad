#!/bin/sh
# deps/install.sh -- install the Debian packages Mooncake-C builds and tests with.
#
#   deps/install.sh build    what `make` needs (compiler, pkg-config, jemalloc, libnuma, RDMA headers,
#                            libcurl, jansson, libmicrohttpd, python3-dev for the Python binding)
#   deps/install.sh test     plus what `make test` needs (tcl, hiredis, redis-tools, redis-server, python3-redis, iproute2, etcd-server,
#                            pytest, numpy, torch and pip for the binding's tests)
#   deps/install.sh all      everything (today the same as test)
#
# Idempotent: it asks dpkg first and runs apt-get only for what is missing,
# and says what it installs. The daemons of the test packages (redis-server,
# etcd) are not started and are left disabled: the tests start their own. Nothing is vendored; every dependency is a
# Debian package found later through pkg-config.
set -e
what=${1:-build}
build_pkgs="build-essential pkg-config libjemalloc-dev libnuma-dev libibverbs-dev libcurl4-openssl-dev libjansson-dev libmicrohttpd-dev python3-dev"
test_pkgs="tcl libhiredis-dev redis-tools redis-server python3-redis clang libclang-rt-14-dev iproute2 etcd-server python3-pytest python3-numpy python3-torch python3-pip python3-setuptools"
all_pkgs=""
case "$what" in
  build) pkgs="$build_pkgs" ;;
  test)  pkgs="$build_pkgs $test_pkgs" ;;
  all)   pkgs="$build_pkgs $test_pkgs $all_pkgs" ;;
  *) echo "usage: $0 build|test|all" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing missing Debian packages:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: apt-get not found; install these packages by hand:$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || { echo "deps: apt-get update failed" >&2; exit 1; }
# redis-server's and etcd-server's packages start their daemon where an
# init system runs: one on 6379 takes `make run`'s port, and the tests
# start their own servers on free ports anyway. So while installing, a
# policy-rc.d forbids starting services (Debian's switch: invoke-rc.d and
# deb-systemd-invoke ask it) -- unless the machine has a policy of its own,
# which is left as it is -- and the daemons installed here are disabled.
policy=/usr/sbin/policy-rc.d
own_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# deps/install.sh (Mooncake-C): no daemon starts while it installs\nexit 101\n' |
    $SUDO tee "$policy" >/dev/null && $SUDO chmod 755 "$policy" && own_policy=1
  trap '$SUDO rm -f "$policy"' EXIT INT TERM
fi
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null || {
  echo "deps: apt-get install failed for:$missing" >&2; exit 1; }
[ -n "$own_policy" ] && $SUDO rm -f "$policy"
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  for pair in redis-server:redis-server etcd-server:etcd; do
    pkg=${pair%%:*} svc=${pair#*:}
    case " $missing " in
      *" $pkg "*)
        $SUDO systemctl disable --now --quiet "$svc" 2>/dev/null &&
          echo "deps: $svc's service is left off (the tests start their own); 'systemctl enable --now $svc' runs it" ;;
    esac
  done
fi
echo "deps: done"
