#!/bin/sh
# Checks that every relative link and image in the tracked Markdown files
# points at a file that exists (GitHub resolves them against the file's own
# folder), so screenshots and cross-references do not rot. `make lint` runs it.
set -eu
cd "$(dirname "$0")/.."
bad=0
for md in $(git ls-files '*.md'); do
	dir=$(dirname "$md")
	# ](target) and ](target "title"); absolute URLs, mail and in-page anchors are not files.
	for target in $(grep -o '](\([^)]*\))' "$md" | sed -e 's/^](//' -e 's/)$//' -e 's/ .*//' -e 's/#.*//' |
		grep -v -e '^[a-z][a-z+.-]*:' -e '^$' | sort -u); do
		if [ ! -e "$dir/$target" ]; then
			echo "$md: broken link: $target"
			bad=1
		fi
	done
done
exit $bad
