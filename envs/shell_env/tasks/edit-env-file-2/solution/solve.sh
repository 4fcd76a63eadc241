#!/bin/bash
set -euo pipefail
cd /app
sed -i -e 's/^YARROW=.*/YARROW=3561/' -e '/^RAVEN=/d' /app/app.env
echo DEBUG=false >> /app/app.env
