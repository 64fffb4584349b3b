# Sourced by devstack/stack.sh: a throwaway CA and the certificates every TLS variant uses,
# made once under <datadir>/tls/ and reused (a `wipe` makes a new CA).
#
#   ca.crt                      the devstack CA (clients trust this)
#   server.crt / server.key     CN and SAN 127.0.0.1 + localhost (MariaDB, Redis, Kafka)
#   client.crt / client.key     CN cachesync, for clients that present a certificate
#   server.p12                  PKCS12 keystore (server key + chain) for Kafka
#   truststore.p12              PKCS12 truststore holding the CA, for Java clients (keytool)
#   <datadir>/secrets/tls-store.password   the password of both stores
TLS_DAYS=3650
TLS_STORE_PASSWORD_FILE="$SECRETS/tls-store.password"

tls_sign() { # NAME CN EXT-LINES: an EC P-256 key and a certificate signed by the devstack CA
  local dir="$1.tmpdir" name="$2" cn="$3" ext="$4"
  openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$dir/$name.key"
  openssl req -new -key "$dir/$name.key" -subj "/O=cachesync devstack/CN=$cn" -out "$dir/$name.csr"
  printf '%s\n' "$ext" "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid,issuer" >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days "$TLS_DAYS" -sha256 -extfile "$dir/$name.ext" -out "$dir/$name.crt" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
}

tls_make() { # DIR: every file of the list above, in DIR
  local d="$1"
  openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$d/ca.key"
  openssl req -x509 -new -key "$d/ca.key" -sha256 -days "$TLS_DAYS" -subj "/O=cachesync devstack/CN=cachesync devstack CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" -out "$d/ca.crt"
  tls_sign "${d%.tmpdir}" server 127.0.0.1 "$(printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost")"
  tls_sign "${d%.tmpdir}" client cachesync "$(printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth")"
  openssl pkcs12 -export -name server -in "$d/server.crt" -inkey "$d/server.key" -certfile "$d/ca.crt" \
    -passout "file:$TLS_STORE_PASSWORD_FILE" -out "$d/server.p12"
  if command -v keytool >/dev/null; then
    keytool -importcert -noprompt -alias cachesync-devstack-ca -file "$d/ca.crt" -storetype PKCS12 \
      -keystore "$d/truststore.p12" -storepass:file "$TLS_STORE_PASSWORD_FILE" >/dev/null 2>&1
  fi
  chmod 600 "$d"/*.key "$d"/*.p12 2>/dev/null || true
}

tls_ensure() {
  [ -f "$TLS_DIR/.complete" ] && return 0
  command -v openssl >/dev/null || die "openssl not found (apt-get install openssl)"
  ensure_dirs
  ensure_secret "$TLS_STORE_PASSWORD_FILE"
  local tmp="$TLS_DIR.tmpdir"
  rm -rf "$tmp"; ( umask 077; mkdir -p "$tmp" )
  log "making the devstack CA and certificates in $TLS_DIR"
  if ! tls_make "$tmp" 2>"$LOGS/tls.log"; then
    show_log_and_die "$LOGS/tls.log" "making certificates failed"
  fi
  touch "$tmp/.complete"
  rm -rf "$TLS_DIR"; mv "$tmp" "$TLS_DIR"
}
