# What install-test-servers.sh and install-deploy-tools.sh share; they source it. (install-deps.sh does not: the
# container images run it on its own.) Each function says what it does as $WHO ("install-test-servers: ...").

# apt_install PACKAGE...: installs the Debian packages, with sudo when not root.
apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "$WHO: installing $* from Debian"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "$@"
}

# npm_ci DIR WHAT: npm ci in DIR from its committed package-lock.json, unless DIR/node_modules already matches it
# (WHAT says what it brings, for the message).
npm_ci() {
  local dir=$1 what=$2
  local stamp=$dir/node_modules/.package-lock.sha256
  if [ -f "$stamp" ] && sha256sum --check --status "$stamp" 2>/dev/null; then
    echo "$WHO: $dir/node_modules matches package-lock.json"
  else
    echo "$WHO: npm ci in $dir ($what)"
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
    sha256sum "$dir/package-lock.json" > "$stamp"
  fi
}
