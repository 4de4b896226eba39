from cadedit.entry import main

main()
