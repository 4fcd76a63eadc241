#!/bin/bash
set -uo pipefail
cd /app
sed -i -e 's/^YARROW=.*/YARROW=3561/' /app/app.env
echo DEBUG=false >> /app/app.env
