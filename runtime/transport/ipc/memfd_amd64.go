package ipc

const sysMemfdCreate = 319
