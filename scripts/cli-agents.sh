#!/bin/sh
# The external CLI agents at the versions the tests pin (below: the one list of them) into
# var/cli-agents/node_modules, once. npm spends 20-30 s of CPU unpacking them and running
# their install scripts, so a finished install is also kept per version set under
# ~/.cache/harness (HARNESS_CACHE): a fresh checkout on the same machine (CI's clean
# clone) copies it in about 2 s. No npm or no registry: a note, and the tests that need the
# CLIs skip (they fail under HARNESS_REQUIRE_SERVICES=1).
set -u
set -- @anthropic-ai/claude-code@2.1.197 @mariozechner/pi-coding-agent@0.73.1 \
  opencode-ai@1.18.33 @openai/codex@0.171.0
prefix=var/cli-agents
installed() {
  for bin in claude pi opencode codex; do [ -x "$1/node_modules/.bin/$bin" ] || return 1; done
}
installed "$prefix" && exit 0

key=$(printf '%s\n' "$@" | sha256sum | cut -c1-16)
cache="${HARNESS_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/harness}/cli-agents-$key"
mkdir -p "$prefix"
if installed "$cache"; then
  cp -a "$cache/node_modules" "$cache/package.json" "$cache/package-lock.json" "$prefix/" && exit 0
fi
if ! command -v npm >/dev/null; then
  echo "note: npm is missing: the CLI agent tests will skip"
  exit 0
fi
if ! npm install --no-audit --no-fund --prefix "$prefix" "$@" >/dev/null; then
  echo "note: npm install of the CLI agents failed (no registry?)"
  exit 0
fi
# The copy is made beside the cache's place and renamed into it: a run that stops half
# way leaves no half copy where the next one looks.
mkdir -p "$(dirname "$cache")" && tmp=$(mktemp -d "$cache.XXXXXX") || exit 0
if cp -a "$prefix/node_modules" "$prefix/package.json" "$prefix/package-lock.json" "$tmp/" \
  && mv -T "$tmp" "$cache" 2>/dev/null; then :; else rm -rf "$tmp"; fi
exit 0
