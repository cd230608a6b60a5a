#!/bin/sh
# deps.sh build|test|bench|lint: make sure the Debian packages a step needs are
# installed. As root it installs what is missing with apt-get; otherwise it
# prints the exact command to run and fails.
set -eu

case "${1:-build}" in
build) pkgs="libmicrohttpd-dev libgnutls28-dev libcurl4-openssl-dev libjansson-dev pkg-config" ;;
test)  pkgs="bats bats-assert bats-support curl jq python3 openssl etcd-server etcd-client chromium" ;;
bench) pkgs="etcd-server etcd-client redis-server wrk hyperfine python3-torch parallel python3-distributed" ;;
lint)  pkgs="mandoc clang-format" ;;
*)     echo "usage: deps.sh build|test|bench|lint" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$st" in
	*"install ok installed"*) ;;
	*) missing="$missing $p" ;;
	esac
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "deps: installing$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >&2
	exit 0
fi
echo "deps: missing Debian packages:$missing" >&2
echo "deps: install them with: sudo apt-get install -y$missing" >&2
exit 1
