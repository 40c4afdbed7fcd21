#!/usr/bin/env bash
# Installs Debian's chromium for the dashboard's browser tests (ui/test, chromedp) when it
# is missing. With CI set, a failed install fails the run; otherwise it is reported and
# the browser tests skip.
set -u
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
	exit 0
fi
echo "chromium: installing Debian's chromium package (browser tests)"
sudo=""
if [ "$(id -u)" != 0 ]; then
	sudo="sudo -n"
fi
if ! { $sudo apt-get install -y -q chromium >/dev/null 2>&1 || { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q chromium >/dev/null 2>&1; }; }; then
	echo "chromium: could not install chromium; the browser tests will skip" >&2
	if [ -n "${CI:-}" ]; then
		exit 1
	fi
fi
exit 0
