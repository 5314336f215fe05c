"""Sans-IO protocol code: bytes in, events out. Nothing here touches a socket or a clock."""
