set -euo pipefail
mkdir -p /app/repo && cd /app/repo
git init -q -b main .
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.4.3\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\nonyx = 71\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/onyx0.txt')" && printf '%b' "basalt delta\n" > 'src/onyx0.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-01T12:00:00Z GIT_COMMITTER_DATE=2026-01-01T12:00:00Z git commit -qm 'add onyx'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.4.3\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\nonyx = 71\nharbor = 65\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/harbor1.txt')" && printf '%b' "pepper juniper\n" > 'src/harbor1.txt'
mkdir -p "$(dirname 'src/onyx0.txt')" && printf '%b' "basalt delta\n" > 'src/onyx0.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-02T12:00:00Z GIT_COMMITTER_DATE=2026-01-02T12:00:00Z git commit -qm 'add harbor'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.4.3\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\nonyx = 71\nharbor = 65\nsaffron = 67\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/harbor1.txt')" && printf '%b' "pepper juniper\n" > 'src/harbor1.txt'
mkdir -p "$(dirname 'src/onyx0.txt')" && printf '%b' "basalt delta\n" > 'src/onyx0.txt'
mkdir -p "$(dirname 'src/saffron2.txt')" && printf '%b' "cedar zephyr\n" > 'src/saffron2.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-03T12:00:00Z GIT_COMMITTER_DATE=2026-01-03T12:00:00Z git commit -qm 'add saffron'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "1.4.3\n" > 'VERSION'
mkdir -p "$(dirname 'config/settings.ini')" && printf '%b' "[app]\nonyx = 71\nharbor = 65\nsaffron = 67\nharbor = 58\n" > 'config/settings.ini'
mkdir -p "$(dirname 'src/harbor1.txt')" && printf '%b' "pepper juniper\n" > 'src/harbor1.txt'
mkdir -p "$(dirname 'src/harbor3.txt')" && printf '%b' "quartz indigo\n" > 'src/harbor3.txt'
mkdir -p "$(dirname 'src/onyx0.txt')" && printf '%b' "basalt delta\n" > 'src/onyx0.txt'
mkdir -p "$(dirname 'src/saffron2.txt')" && printf '%b' "cedar zephyr\n" > 'src/saffron2.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-04T12:00:00Z GIT_COMMITTER_DATE=2026-01-04T12:00:00Z git commit -qm 'add harbor'
git rm -rq --ignore-unmatch . >/dev/null
mkdir -p "$(dirname 'VERSION')" && printf '%b' "broken\n" > 'VERSION'
mkdir -p "$(dirname 'src/harbor1.txt')" && printf '%b' "pepper juniper\n" > 'src/harbor1.txt'
mkdir -p "$(dirname 'src/harbor3.txt')" && printf '%b' "quartz indigo\n" > 'src/harbor3.txt'
mkdir -p "$(dirname 'src/onyx0.txt')" && printf '%b' "basalt delta\n" > 'src/onyx0.txt'
mkdir -p "$(dirname 'src/saffron2.txt')" && printf '%b' "cedar zephyr\n" > 'src/saffron2.txt'
git add -A && GIT_AUTHOR_DATE=2026-01-05T12:00:00Z GIT_COMMITTER_DATE=2026-01-05T12:00:00Z git commit -qm 'cleanup nickel'
