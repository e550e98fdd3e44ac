package provider

import "os"

// WriteMaildirTmp writes a message into dir's tmp/ as Send does (its name,
// its lock), calling write with the open file: a test's helper process
// uses it to die half way through a write, or to stay in the middle of
// one.
func WriteMaildirTmp(dir, key string, write func(*os.File) error) (string, error) {
	name := maildirTmpName(MaildirFileName(key, 0))
	return name, writeSynced(dir+"/tmp/"+name, write)
}
