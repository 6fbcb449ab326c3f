"""The RESP front end: connections, the command table, the backing store. Imports no ML runtime."""
