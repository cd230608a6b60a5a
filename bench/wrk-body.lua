-- wrk-body.lua: makes wrk send WRK_METHOD (default GET) with the body
-- WRK_BODY and the Content-Type WRK_CTYPE, for PUT and JSON POST loads.
wrk.method = os.getenv("WRK_METHOD") or "GET"
wrk.body = os.getenv("WRK_BODY")
local ctype = os.getenv("WRK_CTYPE")
if ctype ~= nil and ctype ~= "" then
	wrk.headers["Content-Type"] = ctype
end
