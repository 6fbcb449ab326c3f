"""The RESP front end: connections, the command table, the backing store. Imports no ML runtime."""

import backends  # noqa: F401  (first: it installs the REDISAI_PURE_PYTHON finder before any hot module loads)
