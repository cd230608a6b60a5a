# etcd.bash: etcd clusters for a test, on loopback ports, loaded after
# helper.bash by the bats files that need one. Members are daemons of the
# test: stopped by PID in its teardown, their data under its directory.
# Without etcd installed, a test that asks for a cluster is skipped.

# Members of the cluster started last, by index: PID, client address
# (127.0.0.1:PORT) and name.
ETCD_PIDS=()
ETCD_ADDRS=()
ETCD_NAMES=()
# Each member's etcd arguments, quoted for eval (etcd_launch).
ETCD_ARGS=()
# Their client URLs, comma-separated, as etcd-probe -e takes them.
ETCD_ENDPOINTS=
# For a cluster over TLS (etcd_tls): https, and what curl needs to ask it.
ETCD_SCHEME=http
ETCD_CURL=()
ETCD_TLS_ARGS=()

# etcd_require: skips the test unless etcd (Debian's etcd-server) is here.
etcd_require() {
	command -v etcd >/dev/null 2>&1 ||
		skip "etcd is not installed (apt-get install etcd-server etcd-client)"
}

# etcd_healthy ADDR: the member at ADDR says it is healthy (it has a
# leader and no alarm).
etcd_healthy() {
	curl -s -m 2 "${ETCD_CURL[@]}" "$ETCD_SCHEME://$1/health" 2>/dev/null |
		grep -q '"health":"true"'
}

# start_etcd N [ETCD ARGS...]: a cluster of N members (1 or 3, say), each
# logging to $T/etcd-NAME.log, with ETCD ARGS added to each; returns once
# every member is healthy. Sets ETCD_PIDS, ETCD_ADDRS, ETCD_NAMES,
# ETCD_ARGS and ETCD_ENDPOINTS.
start_etcd() {
	local n=$1 i cluster= name
	local -a cports=() pports=()
	shift
	etcd_require
	ETCD_PIDS=() ETCD_ADDRS=() ETCD_NAMES=() ETCD_ENDPOINTS= ETCD_ARGS=()
	for ((i = 0; i < n; i++)); do
		cports+=("$(free_port)") && pports+=("$(free_port)") || return 1
		ETCD_NAMES+=("m$i")
		cluster+=${cluster:+,}m$i=http://127.0.0.1:${pports[i]}
	done
	for ((i = 0; i < n; i++)); do
		name=${ETCD_NAMES[i]}
		ETCD_ADDRS+=("127.0.0.1:${cports[i]}")
		ETCD_ARGS+=("$(printf '%q ' --name "$name" --data-dir "$T/etcd/$name" \
			--listen-client-urls "$ETCD_SCHEME://127.0.0.1:${cports[i]}" \
			--advertise-client-urls "$ETCD_SCHEME://127.0.0.1:${cports[i]}" \
			--listen-peer-urls "http://127.0.0.1:${pports[i]}" \
			--initial-advertise-peer-urls "http://127.0.0.1:${pports[i]}" \
			--initial-cluster "$cluster" \
			--initial-cluster-token "muster-test-$$" \
			--initial-cluster-state new "${ETCD_TLS_ARGS[@]}" "$@")")
		ETCD_ENDPOINTS+=${ETCD_ENDPOINTS:+,}$ETCD_SCHEME://${ETCD_ADDRS[i]}
		etcd_launch "$i"
	done
	for ((i = 0; i < n; i++)); do
		wait_for 30 etcd_healthy "${ETCD_ADDRS[i]}" && continue
		echo "start_etcd: member ${ETCD_NAMES[i]} never became healthy:" >&2
		tail -20 "$T/etcd-${ETCD_NAMES[i]}.log" >&2
		return 1
	done
}

# etcd_tls: the next start_etcd serves its clients over TLS only, with a
# CA, a server certificate for 127.0.0.1 and a client certificate made
# under $T/tls (ca.pem, server.pem and -key.pem, client.pem and
# -key.pem), and asks clients for theirs. Skips without openssl.
etcd_tls() {
	local d=$T/tls
	etcd_require
	command -v openssl >/dev/null 2>&1 || skip "openssl is not installed"
	mkdir -p "$d"
	(
		cd "$d" || exit 1
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
			-nodes -days 2 -subj /CN=muster-test-ca \
			-keyout ca-key.pem -out ca.pem
		# The server's certificate is a client's too: etcd's gateway
		# shows it to the member's own gRPC server.
		for who in server client; do
			printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=%s\n' \
				"$([ $who = server ] && echo serverAuth,clientAuth || echo clientAuth)" >$who.ext
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
				-subj "/CN=muster-test-$who" -keyout $who-key.pem -out $who.csr
			openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca-key.pem \
				-CAcreateserial -days 2 -extfile $who.ext -out $who.pem
		done
	) >"$T/tls.log" 2>&1 || {
		cat "$T/tls.log" >&2
		return 1
	}
	ETCD_SCHEME=https
	ETCD_CURL=(--cacert "$d/ca.pem" --cert "$d/client.pem" --key "$d/client-key.pem")
	ETCD_TLS_ARGS=(--cert-file "$d/server.pem" --key-file "$d/server-key.pem"
		--client-cert-auth --trusted-ca-file "$d/ca.pem")
}

# etcd_leader: the index of the member that leads now, as the members
# say; fails when none does.
etcd_leader() {
	local i id leader
	for i in "${!ETCD_ADDRS[@]}"; do
		running "${ETCD_PIDS[i]}" || continue
		read -r id leader < <(curl -s -m 2 "${ETCD_CURL[@]}" -X POST -d '{}' \
			"$ETCD_SCHEME://${ETCD_ADDRS[i]}/v3/maintenance/status" |
			jq -r '"\(.header.member_id) \(.leader)"') || continue
		[ -n "$id" ] && [ "$id" = "$leader" ] && echo "$i" && return 0
	done
	return 1
}

# etcd_endpoints I...: the client URLs of members I..., in that order.
etcd_endpoints() {
	local i list=
	for i in "$@"; do
		list+=${list:+,}$ETCD_SCHEME://${ETCD_ADDRS[i]}
	done
	echo "$list"
}

# etcd_launch I: member I, with its arguments (ETCD_ARGS), in the
# background; its PID in ETCD_PIDS.
etcd_launch() {
	eval "exec etcd ${ETCD_ARGS[$1]}" >>"$T/etcd-${ETCD_NAMES[$1]}.log" 2>&1 &
	ETCD_PIDS[$1]=$!
	DAEMON_PIDS+=("$!")
}

# etcd_restart I: member I again, as it was started, on its data; returns
# once it is healthy.
etcd_restart() {
	etcd_launch "$1"
	wait_for 30 etcd_healthy "${ETCD_ADDRS[$1]}"
}

# etcd_kill9 I: kill -9 of member I, waited for.
etcd_kill9() {
	kill9 "${ETCD_PIDS[$1]}"
}

# replica NAME [ARGS...]: a $REPLICA replica (coordd unless set) on the
# store, logging to $T/NAME.log; its port in $T/NAME.port, its PID in
# PID_NAME.
replica() {
	local name=$1
	shift
	rm -f "$T/$name.port"
	"${REPLICA:-coordd}" -l 127.0.0.1:0 --port-file "$T/$name.port" \
		--store "${STORE_SCHEME:-etcd}://$(etcd_store)/muster/test" "$@" \
		2>>"$T/$name.log" &
	printf -v "PID_$name" %s "$!"
	DAEMON_PIDS+=("$!")
	wait_file "$T/$name.port"
}

# etcdctl ARGS...: etcd's own client on the cluster.
etcdctl() {
	ETCDCTL_API=3 command etcdctl --endpoints "$ETCD_ENDPOINTS" "$@"
}

# etcd_store: the members' HOST:PORTs, comma-separated.
etcd_store() {
	local IFS=,
	echo "${ETCD_ADDRS[*]}"
}

# addr NAME: where replica NAME listens.
addr() {
	echo "127.0.0.1:$(cat "$T/$1.port")"
}

# role NAME: leader, standby or starting, as replica NAME says.
role() {
	curl -s -m 5 "http://$(addr "$1")/v1/replicas" | jq -r .role
}

is_role() {
	[ "$(role "$1")" = "$2" ]
}

# pair [ARGS...]: replica a, once it leads, and replica b standing by.
pair() {
	replica a "$@"
	wait_for 30 is_role a leader
	replica b "$@"
	wait_for 30 is_role b standby
}
