set -euo pipefail
mkdir -p /app/repo && cd /app/repo
git init -q -b main .
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.6.8\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\nkrypton = 87\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/krypton0.txt')" && printf '%b' "basalt zephyr\n" > 'src/krypton0.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-01T12:00:00Z GIT_COMMITTER_DATE=2026-01-01T12:00:00Z git commit -qm 'add krypton'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.6.8\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\nkrypton = 87\nkrypton = 61\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/krypton0.txt')" && printf '%b' "basalt zephyr\n" > 'src/krypton0.txt'
mkdir -p "$(dirname 'src/krypton1.txt')" && printf '%b' "delta garnet\n" > 'src/krypton1.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-02T12:00:00Z GIT_COMMITTER_DATE=2026-01-02T12:00:00Z git commit -qm 'add krypton'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.6.8\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\nkrypton = 87\nkrypton = 61\nindigo = 98\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/indigo2.txt')" && printf '%b' "meadow lagoon\n" > 'src/indigo2.txt'
mkdir -p "$(dirname 'src/krypton0.txt')" && printf '%b' "basalt zephyr\n" > 'src/krypton0.txt'
mkdir -p "$(dirname 'src/krypton1.txt')" && printf '%b' "delta garnet\n" > 'src/krypton1.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-03T12:00:00Z GIT_COMMITTER_DATE=2026-01-03T12:00:00Z git commit -qm 'add indigo'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.6.8\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\nkrypton = 87\nkrypton = 61\nindigo = 98\ngarnet = 74\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/garnet3.txt')" && printf '%b' "krypton yarrow\n" > 'src/garnet3.txt'
mkdir -p "$(dirname 'src/indigo2.txt')" && printf '%b' "meadow lagoon\n" > 'src/indigo2.txt'
mkdir -p "$(dirname 'src/krypton0.txt')" && printf '%b' "basalt zephyr\n" > 'src/krypton0.txt'
mkdir -p "$(dirname 'src/krypton1.txt')" && printf '%b' "delta garnet\n" > 'src/krypton1.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-04T12:00:00Z GIT_COMMITTER_DATE=2026-01-04T12:00:00Z git commit -qm 'add garnet'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "broken\n" > 'VERSION'
mkdir -p "$(dirname 'src/garnet3.txt')" && printf '%b' "krypton yarrow\n" > 'src/garnet3.txt'
mkdir -p "$(dirname 'src/indigo2.txt')" && printf '%b' "meadow lagoon\n" > 'src/indigo2.txt'
mkdir -p "$(dirname 'src/krypton0.txt')" && printf '%b' "basalt zephyr\n" > 'src/krypton0.txt'
mkdir -p "$(dirname 'src/krypton1.txt')" && printf '%b' "delta garnet\n" > 'src/krypton1.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-05T12:00:00Z GIT_COMMITTER_DATE=2026-01-05T12:00:00Z git commit -qm 'cleanup garnet'
