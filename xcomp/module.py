class Module: pass
