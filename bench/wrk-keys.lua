-- wrk-keys.lua: PUTs of distinct keys k/<thread>/<n> with a 16-byte value,
-- to fill a store; each wrk thread numbers its own keys.
-- id is each thread's global, set by setup.
local counter = 0
local threads = 0

function setup(thread)
	thread:set("id", threads)
	threads = threads + 1
end

function request()
	counter = counter + 1
	return wrk.format("PUT", "/v1/kv/k/" .. id .. "/" .. counter .. "?mode=overwrite",
		{["Content-Type"] = "application/octet-stream"}, "0123456789abcdef")
end
