from tokenpath.cli import main

main()
