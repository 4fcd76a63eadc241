set -euo pipefail
mkdir -p /app/repo && cd /app/repo
git init -q -b main .
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.6.1\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\number = 10\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/umber0.txt')" && printf '%b' "tundra raven\n" > 'src/umber0.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-01T12:00:00Z GIT_COMMITTER_DATE=2026-01-01T12:00:00Z git commit -qm 'add umber'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.6.1\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\number = 10\namber = 73\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/amber1.txt')" && printf '%b' "willow violet\n" > 'src/amber1.txt'
mkdir -p "$(dirname 'src/umber0.txt')" && printf '%b' "tundra raven\n" > 'src/umber0.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-02T12:00:00Z GIT_COMMITTER_DATE=2026-01-02T12:00:00Z git commit -qm 'add amber'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.6.1\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\number = 10\namber = 73\nviolet = 11\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/amber1.txt')" && printf '%b' "willow violet\n" > 'src/amber1.txt'
mkdir -p "$(dirname 'src/umber0.txt')" && printf '%b' "tundra raven\n" > 'src/umber0.txt'
mkdir -p "$(dirname 'src/violet2.txt')" && printf '%b' "garnet lagoon\n" > 'src/violet2.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-03T12:00:00Z GIT_COMMITTER_DATE=2026-01-03T12:00:00Z git commit -qm 'add violet'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.6.1\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\number = 10\namber = 73\nviolet = 11\ngarnet = 10\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/amber1.txt')" && printf '%b' "willow violet\n" > 'src/amber1.txt'
mkdir -p "$(dirname 'src/garnet3.txt')" && printf '%b' "basalt nickel\n" > 'src/garnet3.txt'
mkdir -p "$(dirname 'src/umber0.txt')" && printf '%b' "tundra raven\n" > 'src/umber0.txt'
mkdir -p "$(dirname 'src/violet2.txt')" && printf '%b' "garnet lagoon\n" > 'src/violet2.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-04T12:00:00Z GIT_COMMITTER_DATE=2026-01-04T12:00:00Z git commit -qm 'add garnet'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "broken\n" > 'VERSION'
mkdir -p "$(dirname 'src/amber1.txt')" && printf '%b' "willow violet\n" > 'src/amber1.txt'
mkdir -p "$(dirname 'src/garnet3.txt')" && printf '%b' "basalt nickel\n" > 'src/garnet3.txt'
mkdir -p "$(dirname 'src/umber0.txt')" && printf '%b' "tundra raven\n" > 'src/umber0.txt'
mkdir -p "$(dirname 'src/violet2.txt')" && printf '%b' "garnet lagoon\n" > 'src/violet2.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-05T12:00:00Z GIT_COMMITTER_DATE=2026-01-05T12:00:00Z git commit -qm 'cleanup onyx'
