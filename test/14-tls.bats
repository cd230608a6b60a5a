#!/usr/bin/env bats
# HTTPS: coordd's --tls-cert, --tls-key and --tls-client-ca; clients reach
# it at https:// addresses, trusting MUSTER_TLS_CA_FILE and showing
# MUSTER_TLS_CERT_FILE; GnuTLS is loaded only for an https:// address.

load helper

bats_require_minimum_version 1.5.0

# cert NAME CA SAN: a P-256 key and a certificate CA signs, in the file's
# directory (NAME.key, NAME.pem).
cert() {
	local d=$BATS_FILE_TMPDIR name=$1 ca=$2 san=$3
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$d/$name.key" -out "$d/$name.csr" -subj "/CN=$name" 2>/dev/null
	printf '%s\n' "$san" >"$d/$name.ext"
	openssl x509 -req -in "$d/$name.csr" -CA "$d/$ca.pem" -CAkey "$d/$ca.key" \
		-CAcreateserial -out "$d/$name.pem" -days 2 -extfile "$d/$name.ext" 2>/dev/null
}

# ca NAME [CN]: a self-signed CA (NAME.key, NAME.pem).
ca() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$BATS_FILE_TMPDIR/$1.key" -out "$BATS_FILE_TMPDIR/$1.pem" \
		-days 2 -subj "/CN=${2:-$1}" 2>/dev/null
}

setup_file() {
	ca ca
	ca other-ca
	# Named as ca is, with a key of its own: its certificates claim ca's.
	ca forger ca
	cert server ca 'subjectAltName=IP:127.0.0.1,DNS:localhost'
	cert elsewhere ca 'subjectAltName=DNS:coordd.example.org'
	cert worker ca 'extendedKeyUsage=clientAuth'
	cert stranger other-ca 'extendedKeyUsage=clientAuth'
	cert forged forger 'extendedKeyUsage=clientAuth'
}

setup() {
	T=$BATS_TEST_TMPDIR
	C=$BATS_FILE_TMPDIR
	cd "$T" || return 1
}

# start_https [ARGS...]: coordd serving HTTPS with the server certificate;
# MUSTER_COORD is its https:// address.
start_https() {
	start_coordd --tls-cert "$C/server.pem" --tls-key "$C/server.key" "$@" || return 1
	MUSTER_COORD=https://127.0.0.1:$COORD_PORT
}

@test "coordd checks its TLS files before it listens, and exits 2 saying why" {
	run --separate-stderr coordd -n --tls-cert "$C/server.pem"
	assert_failure 2
	[[ $stderr == *"--tls-cert and --tls-key go together"* ]] || fail "$stderr"
	run --separate-stderr coordd -n --tls-cert "$C/server.pem" --tls-key "$C/worker.key"
	assert_failure 2
	[[ $stderr == *"do not match"* ]] || fail "$stderr"
	run --separate-stderr coordd -n --tls-client-ca "$C/ca.pem"
	assert_failure 2
	[[ $stderr == *"--tls-client-ca needs --tls-cert"* ]] || fail "$stderr"
	run --separate-stderr coordd -n --tls-cert "$C/server.pem" --tls-key "$C/server.key" \
		--tls-client-ca "$C/server.key"
	assert_failure 2
	[[ $stderr == *"holds no certificate"* ]] || fail "$stderr"
	run --separate-stderr coordd -n --tls-cert "$T/none.pem" --tls-key "$C/server.key"
	assert_failure 2
	run coordd -n --tls-cert "$C/server.pem" --tls-key "$C/server.key"
	assert_success
	# Client certificates authenticate: enough to listen beyond loopback.
	run coordd -n -l 0.0.0.0:7700 --tls-cert "$C/server.pem" --tls-key "$C/server.key" \
		--tls-client-ca "$C/ca.pem"
	assert_success
}

@test "over HTTPS kvctl works with the CA that signed coordd's certificate, and only with it" {
	start_https
	MUSTER_TLS_CA_FILE=$C/ca.pem kvctl put k v
	MUSTER_TLS_CA_FILE=$C/ca.pem run kvctl get k
	assert_output v
	MUSTER_TLS_CA_FILE=$C/ca.pem run kvctl -c "https://localhost:$COORD_PORT" get k
	assert_output v
	# Another CA's trust (the system's, here) does not vouch for it.
	MUSTER_TLS_CA_FILE=$C/other-ca.pem run --separate-stderr kvctl get k
	assert_failure 9
	[[ $stderr == *"certificate is not trusted"* ]] || fail "$stderr"
	# Plain HTTP to an HTTPS port gets nothing.
	run --separate-stderr kvctl -c "127.0.0.1:$COORD_PORT" --timeout 2s get k
	assert_failure
	run curl -s -m 10 "http://127.0.0.1:$COORD_PORT/healthz"
	refute_output ok
	run curl -s -m 10 --cacert "$C/ca.pem" "https://127.0.0.1:$COORD_PORT/healthz"
	assert_output ok
}

@test "a certificate that does not name the address's host is refused" {
	start_coordd --tls-cert "$C/elsewhere.pem" --tls-key "$C/elsewhere.key"
	MUSTER_TLS_CA_FILE=$C/ca.pem run --separate-stderr \
		kvctl -c "https://127.0.0.1:$COORD_PORT" put k v
	assert_failure 9
	[[ $stderr == *"not trusted"*"name in the certificate does not match"* ]] ||
		fail "$stderr"
}

@test "bad TLS settings on a client exit 2 before any request" {
	start_https
	MUSTER_TLS_CA_FILE=$T/missing.pem run --separate-stderr kvctl get k
	assert_failure 2
	[[ $stderr == *"MUSTER_TLS_CA_FILE $T/missing.pem"* ]] || fail "$stderr"
	MUSTER_TLS_CA_FILE=$C/ca.pem MUSTER_TLS_CERT_FILE=$C/worker.pem run --separate-stderr kvctl get k
	assert_failure 2
	[[ $stderr == *"go together"* ]] || fail "$stderr"
	MUSTER_TLS_CA_FILE=$C/ca.pem MUSTER_TLS_CERT_FILE=$C/worker.pem \
		MUSTER_TLS_KEY_FILE=$C/server.key run --separate-stderr kvctl get k
	assert_failure 2
	[[ $stderr == *"do not match"* ]] || fail "$stderr"
}

@test "with --tls-client-ca a client needs a certificate that CA signed (401 otherwise)" {
	start_https --tls-client-ca "$C/ca.pem"
	export MUSTER_TLS_CA_FILE=$C/ca.pem
	run --separate-stderr kvctl put k v
	assert_failure 11
	[[ $stderr == *"needs a client certificate"* ]] || fail "$stderr"
	# One from another CA is not even offered to it.
	MUSTER_TLS_CERT_FILE=$C/stranger.pem MUSTER_TLS_KEY_FILE=$C/stranger.key \
		run --separate-stderr kvctl put k v
	assert_failure 11
	MUSTER_TLS_CERT_FILE=$C/forged.pem MUSTER_TLS_KEY_FILE=$C/forged.key \
		run --separate-stderr kvctl put k v
	assert_failure 11
	[[ $stderr == *"not signed by"* ]] || fail "$stderr"
	export MUSTER_TLS_CERT_FILE=$C/worker.pem MUSTER_TLS_KEY_FILE=$C/worker.key
	kvctl put k v
	run kvctl get k
	assert_output v
	# A liveness probe needs nothing but the connection.
	run curl -s -m 10 --cacert "$C/ca.pem" "https://127.0.0.1:$COORD_PORT/healthz"
	assert_output ok
	run curl -s -m 10 --cacert "$C/ca.pem" --cert "$C/worker.pem" --key "$C/worker.key" \
		"https://127.0.0.1:$COORD_PORT/metrics"
	assert_line --regexp '^muster_http_unauthenticated_total [3-9]$'
}

@test "a job over HTTPS with client certificates and a token: preemptwatch, barrierwait, a parked get" {
	printf 'tok-%s\n' "$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >token
	chmod 600 token
	start_https --tls-client-ca "$C/ca.pem" --token-file token --cluster worker=2 \
		--heartbeat-timeout 10s
	export MUSTER_TLS_CA_FILE=$C/ca.pem MUSTER_TLS_CERT_FILE=$C/worker.pem \
		MUSTER_TLS_KEY_FILE=$C/worker.key MUSTER_TOKEN_FILE=$T/token
	kvctl --timeout 30s get later >later.out 2>later.err &
	local getter=$! i pids=()
	BG_PIDS+=("$getter")
	for i in 0 1; do
		pw "w$i" -t "worker:$i" -- bash -c \
			'barrierwait --timeout 30s ready && echo "$MUSTER_COORD" >coord.$MUSTER_TASK_INDEX'
		pids+=("$PID")
	done
	for i in 0 1; do
		wait "${pids[i]}" || fail "worker:$i: $(cat "w$i.err")"
	done
	assert_equal "$(cat coord.0)" "$MUSTER_COORD"
	kvctl put later now
	wait "$getter" || fail "the parked get: $(cat later.err)"
	assert_equal "$(cat later.out)" now
}

@test "GnuTLS is loaded only for an https:// address" {
	start_coordd
	# Plain: TLS settings are not even looked at.
	MUSTER_TLS_CA_FILE=$T/missing.pem LD_DEBUG=files kvctl put k v 2>ld.plain
	run grep -c 'libgnutls' ld.plain
	assert_output 0
	start_https
	MUSTER_TLS_CA_FILE=$C/ca.pem LD_DEBUG=files kvctl put k v 2>ld.tls
	grep -q 'file=libgnutls.so.30' ld.tls
}

@test "a worker's data port over TLS: workerloop --tls-cert, consumers verify it and show the job's secret; plain HTTP and an untrusted worker get nothing" {
	run -2 workerloop -t a:0 --tls-cert "$C/server.pem"
	[[ $output == *"--tls-cert and --tls-key go together"* ]]
	run -2 workerloop -t a:0 --tls-cert "$C/server.pem" --tls-key "$C/worker.key"
	start_dispatchd --tls-cert "$C/server.pem" --tls-key "$C/server.key"
	MUSTER_DISPATCHER=https://127.0.0.1:$DISPATCH_PORT
	export MUSTER_TLS_CA_FILE=$C/ca.pem
	start_worker a:0 --tls-cert "$C/server.pem" --tls-key "$C/server.key"
	addr=$(sed -n 's/.*serving data on //p' "$T/a:0.log")
	[[ $addr == https://127.0.0.1:* ]]
	id=$(seq 1 20 | dispatchctl dataset add --splits - --reader \
		'for i in 1 2 3; do echo "$MUSTER_SPLIT.$i"; done')
	run -0 dispatchctl read "$id"
	[ "$(sort <<<"$output")" = "$(for s in $(seq 1 20); do for i in 1 2 3; do echo "$s.$i"; done; done | sort)" ]
	# Plain HTTP gets no reply; HTTPS without the job's secret gets 401.
	run curl -s -m 10 "http://${addr#https://}/v1/tasks/1/elements"
	[ -z "$output" ]
	run curl -s -m 10 --cacert "$C/ca.pem" -o /dev/null -w '%{http_code}' "$addr/v1/tasks/1/elements"
	[ "$output" = 401 ]
	# A consumer that does not trust the worker's certificate stops,
	# saying why, rather than read in the clear or wait for ever.
	a=$WORKER_PID
	start_worker b:0 --tls-cert "$C/elsewhere.pem" --tls-key "$C/elsewhere.key"
	kill "$a"
	a_gone() { ! worker_live a:0; }
	wait_for 30 a_gone
	run -9 dispatchctl read "$id"
	[[ $output == *"not trusted"* || $output == *"certificate"* ]]
}

@test "over https, tryget fails UNAVAILABLE (9) within a second on a peer that takes the connection and never answers the handshake" {
	silent_peer
	export MUSTER_TLS_CA_FILE=$C/ca.pem MUSTER_COORD=https://127.0.0.1:$(cat port)
	local t0 took
	t0=$(now_ms)
	run --separate-stderr kvctl --timeout 10s tryget k
	took=$(($(now_ms) - t0))
	assert_failure 9
	assert_equal "$stderr" "kvctl: UNAVAILABLE: cannot reach 127.0.0.1:$(cat port): TLS handshake timed out"
	[ "$took" -lt 3000 ] || fail "tryget took ${took}ms"
}
