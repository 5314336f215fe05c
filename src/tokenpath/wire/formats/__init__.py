"""One module per streaming API format, each declaring its ApiSpec (wire/apispec.py) with every fact that varies
with it, cited from its provider's docs; wire/apis.py gathers them into the registry."""
