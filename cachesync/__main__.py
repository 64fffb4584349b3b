from cachesync.launch import main

main()
