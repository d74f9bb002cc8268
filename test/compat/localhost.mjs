// Preloaded (node --import) by the https scenarios: Node resolves "localhost" but not names
// under it, which curl and browsers send to loopback; this lookup does the same for
// {port}-{id}.cove.localhost, so nothing leaves the machine and no hosts file is touched.
import dns from 'node:dns'

const lookup = dns.lookup
dns.lookup = function (host, options, callback) {
  if (typeof options === 'function') {
    callback = options
    options = {}
  }
  if (typeof host === 'string' && host.toLowerCase().endsWith('.localhost')) {
    const all = typeof options === 'object' && options?.all
    if (all) return process.nextTick(callback, null, [{ address: '127.0.0.1', family: 4 }])
    return process.nextTick(callback, null, '127.0.0.1', 4)
  }
  return lookup.call(this, host, options, callback)
}
