#!/bin/sh
# `make run`: the agent's bash tool runs in a bubblewrap sandbox. When `bwrap` is missing,
# install it if we can (root with apt-get, as `make system-deps` does), else say in one line
# how to get it. The server starts either way: without bwrap, bash is simply not offered.
# HARNESS_BASH=off or unsafe needs no sandbox.
case "${HARNESS_BASH:-sandbox}" in off|unsafe) exit 0 ;; esac
command -v bwrap >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "Installing bubblewrap (the sandbox of the agent's bash tool) with apt-get..."
	if DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null &&
		command -v bwrap >/dev/null 2>&1; then
		exit 0
	fi
	echo "Could not install bubblewrap with apt-get; the agent's bash tool is off until it is installed."
	exit 0
fi
echo "bubblewrap (bwrap) is not installed, so the agent's bash tool is off: install it (sudo apt-get install bubblewrap, or dnf/pacman install bubblewrap) and run make run again."
