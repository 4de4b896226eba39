from cadedit.cli import main

main()
