package ipc

const sysMemfdCreate = 279
