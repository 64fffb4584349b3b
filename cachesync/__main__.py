from cachesync.cli import main

main()
