-- The numeric fields of INFO redlock as a flat key/value array, for
-- redis_exporter's --script option: each becomes
-- redis_script_values{key="redlock_…"} (docs/metrics.md). redis_exporter
-- exports only the INFO fields it knows, and not a module's own section.
local out = {}
for line in string.gmatch(redis.call('INFO', 'redlock'), '[^\r\n]+') do
  local key, value = string.match(line, '^(redlock_[%w_]+):(%-?%d+)$')
  if key then
    out[#out + 1] = key
    out[#out + 1] = value
  end
end
return out
