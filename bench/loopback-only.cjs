'use strict';
// loopback-only.cjs -- preload (`node -r bench/loopback-only.cjs ...`) that makes
// every TCP server of the program listen on 127.0.0.1 when it names no host or a
// wildcard one. supergateway and server-everything have no --host option and
// would otherwise listen on all interfaces; the benchmark must stay on loopback.
const net = require('node:net');

const WILDCARD = new Set(['', '0.0.0.0', '::', '[::]']);
const listen = net.Server.prototype.listen;

net.Server.prototype.listen = function loopbackListen(...args) {
  const a0 = args[0];
  if (typeof a0 === 'number' || (typeof a0 === 'string' && /^\d+$/.test(a0))) {
    // listen(port[, host][, backlog][, callback])
    if (typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
    else if (WILDCARD.has(args[1])) args[1] = '127.0.0.1';
  } else if (a0 && typeof a0 === 'object' && a0.path === undefined && a0.fd === undefined &&
             a0.handle === undefined && a0._handle === undefined && 'port' in a0) {
    // listen(options[, callback])
    if (a0.host === undefined || WILDCARD.has(a0.host)) args[0] = { ...a0, host: '127.0.0.1' };
  }
  return listen.apply(this, args);
};
