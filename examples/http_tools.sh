#!/bin/sh
# The memory tools over HTTP with curl: list them, run one tool call, recall.
#   PMEM_URL=http://127.0.0.1:8080 PMEM_API_KEY=pmem_sk_… PMEM_USER_ID=… sh examples/http_tools.sh
# (`pmem demo --keep-running` prints these as `export` lines, with PMEM_PERSONA_ID and PMEM_TEAM_ID)
set -eu
: "${PMEM_URL:=http://127.0.0.1:8080}"
: "${PMEM_PERSONA_ID:=}"
: "${PMEM_TEAM_ID:=}"
auth="Authorization: Bearer $PMEM_API_KEY"
json="Content-Type: application/json"
context="\"user_id\": \"$PMEM_USER_ID\""
[ -n "$PMEM_PERSONA_ID" ] && context="$context, \"persona_id\": \"$PMEM_PERSONA_ID\""
[ -n "$PMEM_TEAM_ID" ] && context="$context, \"team_id\": \"$PMEM_TEAM_ID\""

curl -sS --fail-with-body -H "$auth" "$PMEM_URL/v1/tools"
echo
curl -sS --fail-with-body -H "$auth" -H "$json" -X POST "$PMEM_URL/v1/tools/call" \
  -d "{\"name\": \"remember\", \"arguments\": {\"subject\": \"me\", \"key\": \"pet\", \"value\": \"Has a cat named Miso\"}, $context}"
echo
curl -sS --fail-with-body -H "$auth" -H "$json" -X POST "$PMEM_URL/v1/tools/call" \
  -d "{\"name\": \"recall\", \"arguments\": {\"subject\": \"me\", \"key\": \"pet\"}, $context}"
echo
curl -sS --fail-with-body -H "$auth" -H "$json" -X POST "$PMEM_URL/v1/recall" \
  -d "{\"query\": \"pets\", \"limit\": 5, $context}"
echo
